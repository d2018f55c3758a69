#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 59308737853); e-mail addresses replaced
#SBATCH --job-name=train_Dataset001_mito2_3d_fullres
#SBATCH --output=/projects/weilab/shenb/mitoFoundation2/5model_training/slurm/logs/train/%x_%j.out
#SBATCH --error=/projects/weilab/shenb/mitoFoundation2/5model_training/slurm/logs/train/%x_%j.err
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=16
#SBATCH --gres=gpu:1
#SBATCH --mem=64g
#SBATCH --time=48:00:00
#SBATCH --partition=weilab
#SBATCH --mail-type=BEGIN,END,FAIL
#SBATCH --mail-user=someone@example.edu

set -euo pipefail
