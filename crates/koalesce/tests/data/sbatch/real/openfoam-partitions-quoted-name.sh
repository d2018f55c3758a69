#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 20987406838); e-mail addresses replaced
#SBATCH --time=100:00:00   # walltime
#SBATCH --ntasks=4  # number of processor cores (i.e. tasks)
#SBATCH --nodes=1   # number of nodes
#SBATCH -p big,batch    # partition(s)
#SBATCH --mem-per-cpu=1000M   # memory per CPU core
#SBATCH -J "plate0"   # job name
#SBATCH --mail-type=BEGIN
#SBATCH --mail-type=END
#SBATCH --mail-type=FAIL

# source OpenFOAM
source /opt/openfoam8/etc/bashrc
