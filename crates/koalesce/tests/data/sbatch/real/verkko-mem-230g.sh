#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 58540857810); e-mail addresses replaced
#SBATCH --partition=norm
#SBATCH --cpus-per-task=32
#SBATCH --mem=230g
#SBATCH --ntasks-per-core=1
#SBATCH --time=140:00:00
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=someone@example.gov
#SBATCH --job-name=G3_verkkoABTU


#Load the modules
