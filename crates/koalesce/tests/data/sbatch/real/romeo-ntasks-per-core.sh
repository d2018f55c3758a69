#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 70411425); e-mail addresses replaced

#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --ntasks-per-core=1
#SBATCH --cpus-per-task=1
#SBATCH --partition=romeo
#SBATCH --time=01:00:00
#SBATCH --account=p_lv_kp_wise2122
#SBATCH --exclusive
#SBATCH --output=out1.txt
#SBATCH --error=err1.txt
#SBATCH --mem=16000

#setting things up
echo "started"
