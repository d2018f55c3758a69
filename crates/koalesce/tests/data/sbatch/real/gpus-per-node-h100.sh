#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 71616646299); e-mail addresses replaced
#SBATCH --job-name=qc
#SBATCH --account=def-ekram_gpu
#SBATCH --nodes=1
#SBATCH --gpus-per-node=h100:1
#SBATCH --cpus-per-task=6
#SBATCH --mem=100G
#SBATCH --time=0:55:00
#SBATCH --output=/scratch/u/legalai/logs/%x_%j.out
set -euo pipefail
