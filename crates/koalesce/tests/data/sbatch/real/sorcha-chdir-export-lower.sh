#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 60341848020); e-mail addresses replaced
#SBATCH --job-name=s3mlink_vdp
#SBATCH --partition=ckpt-all
#SBATCH --account=astro
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=32G
#SBATCH --time=06:00:00
#SBATCH --array=0-112%113
#SBATCH --chdir=/mmfs1/gscratch/u/sorcha
#SBATCH --export=all
#SBATCH --output=logs/%x_%A_%a.out
#SBATCH --error=logs/%x_%A_%a.err
#
# STAGE 3 — VDP scoring.
set -e
