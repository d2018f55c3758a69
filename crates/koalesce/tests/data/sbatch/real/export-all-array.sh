#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 13271501385); e-mail addresses replaced
#SBATCH -p shared
#SBATCH --nodes=1
#SBATCH --mem=120G
#SBATCH -t 00:30:00
#SBATCH -J batch_gridstat
#SBATCH --export=ALL
#SBATCH --array=0-4
##################################################################################
# Description
##################################################################################
set -x
