#!/bin/bash -l
# koalesce corpus: header of a public GitHub file (library index id 14064992713); e-mail addresses replaced
#SBATCH -A uppmax2022-2-5
#SBATCH -M snowy
#SBATCH -p core
#SBATCH -n 4
#SBATCH -t 4:00:00
#SBATCH -J homology_search
#SBATCH -o 4_homology_search.output
#SBATCH -e 4_homology_search_error.output
#SBATCH --mail-user someone@example.se
#SBATCH --mail-type=END,FAIL

set -x
