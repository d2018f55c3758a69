#!/bin/ksh -l
# koalesce corpus: header of a public GitHub file (library index id 22304415300); e-mail addresses replaced
#SBATCH --output=/scratch/u/slurm_output/ICOADS3+.merge-%j.out
#SBATCH --qos=normal
#SBATCH --mem=5000
#SBATCH --ntasks=1
#SBATCH --ntasks-per-core=2
#SBATCH --time=10
./copy_and_merge_month.R --year=1850 --month=1
