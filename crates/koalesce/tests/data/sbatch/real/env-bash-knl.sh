#!/usr/bin/env /bin/bash
# koalesce corpus: header of a public GitHub file (library index id 14780430); e-mail addresses replaced

#SBATCH -A myproject
#SBATCH -N 1
#SBATCH -p regular
#SBATCH -t 08:00:00
#SBATCH --exclusive
#SBATCH --job-name wrf_to_tell_counties
#SBATCH --mail-type=begin,end,fail
#SBATCH --mail-user=someone@example.org

module load parallel
