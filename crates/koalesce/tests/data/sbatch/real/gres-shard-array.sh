#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 71628075281); e-mail addresses replaced
#SBATCH --job-name=of3-de-fresh
#SBATCH --partition=debug
#SBATCH --array=0-5
#SBATCH --gres=shard:1
#SBATCH --cpus-per-task=2
#SBATCH --mem=14G
#SBATCH --time=00:30:00
#SBATCH --output=/home/u/logs/fresh_%A_%a.out
#SBATCH --error=/home/u/logs/fresh_%A_%a.err
set -euo pipefail
