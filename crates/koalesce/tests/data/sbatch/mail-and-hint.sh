#!/bin/bash
#SBATCH --job-name=serial
#SBATCH --ntasks=4
#SBATCH --time=00:30:00
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=someone@example.org
#SBATCH --hint=nomultithread
#SBATCH --requeue
srun hostname
