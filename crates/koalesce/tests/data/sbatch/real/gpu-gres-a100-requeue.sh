#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 71655381328); e-mail addresses replaced
#SBATCH --account=def-shwemaha_gpu
#SBATCH --gres=gpu:a100:3
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=12
#SBATCH --mem-per-cpu=24G
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --output=baseline_full_%j.out

module load python/3.11
