#!/bin/bash
#SBATCH --ntasks=4
#SBATCH --frobnicate=yes
srun ./a.out
