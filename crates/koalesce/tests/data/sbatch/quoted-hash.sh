#!/bin/bash
#SBATCH --job-name="run #1"   # the first run
#SBATCH --ntasks=2 --cpus-per-task=3  # two options on one line
#SBATCH --time=2-00:00:00
#SBATCH --mem=4GB
./run
