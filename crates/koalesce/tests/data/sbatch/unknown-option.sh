#!/bin/bash
#SBATCH --ntasks=4
#SBATCH --hint=nomultithread
srun ./a.out
