#!/usr/bin/env bash
# koalesce corpus: header of a public GitHub file (library index id 36417087675); e-mail addresses replaced
#SBATCH --export=ALL
#SBATCH --mail-type=NONE
#SBATCH --workdir=/home/u/basedir
#SBATCH --partition=dpart
#SBATCH --qos=throughput
#SBATCH --nodes=1
#SBATCH --time=10:00:00
#SBATCH --job-name=hpgltools
#SBATCH --mem=6G
#SBATCH --cpus-per-task=4
#SBATCH --output=outputs/log.txt

cd /home/u/basedir || exit
