#!/bin/sh
#SBATCH --time=1
srun hostname |sort
