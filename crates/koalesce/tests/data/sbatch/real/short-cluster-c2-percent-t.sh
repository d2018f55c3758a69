#!/bin/sh
# koalesce corpus: header of a public GitHub file (library index id 15270887400); e-mail addresses replaced
#SBATCH -c2
#SBATCH --cpus-per-task=1
#SBATCH --time=30:00:00
#SBATCH --mail-type=ALL
#SBATCH --mail-user=someone@example.de
#SBATCH --ntasks=1
#SBATCH --ntasks-per-core=1
#SBATCH -o logs/stdout_%j_%t

srun $HOME/projects/R2Gen/run_iu_xray.sh
