#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 41972950873); e-mail addresses replaced

# Submit this script with: sbatch <this-filename>
#SBATCH --time=48:00:00   # walltime
#SBATCH --ntasks=32   # number of processor cores (i.e. tasks)
#SBATCH --nodes=1   # number of nodes
#SBATCH --mem 190GB   # memory per CPU core
#SBATCH -J kallisto_quantify   # job name
#SBATCH --output=/resnick/groups/u/logs/251211_prokka_LS.out
# Notify at the beginning, end of job and on failure.


#SBATCH --mail-user=someone@example.edu   # email address
#SBATCH --mail-type=BEGIN
#SBATCH --mail-type=END
#SBATCH --mail-type=FAIL

## /SBATCH -p general # partition (queue)
## /SBATCH -o slurm.assembly.%N.%j.out # STDOUT
## /SBATCH -e slurm.assembly.%N.%j.err # STDERR



READS_DIR="/resnick/groups/u/single_assemblies"
