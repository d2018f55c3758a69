#!/bin/bash
#SBATCH --job-name=serial
#SBATCH --ntasks=1
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=someone@example.org
hostname
