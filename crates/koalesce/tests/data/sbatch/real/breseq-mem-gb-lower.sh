#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 30240752292); e-mail addresses replaced
#SBATCH --mail-user=someone@example.edu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --time=9:59:00
#SBATCH --mem=50gb
#SBATCH --mail-type=FAIL,BEGIN,END
#SBATCH --job-name=WSO-L1-T14-rS

##### load dependencies #####
module load r
