#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 13015597270)
#SBATCH --deadline="now+8hours"
#SBATCH --time=15:00
#SBATCH --exclusive
#SBATCH --mem=0

platform=""
