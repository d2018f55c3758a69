#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 7007286735); e-mail addresses replaced
 
#SBATCH --job-name=ksvsssrpow
#SBATCH -n 48
#SBATCH --time=8:00:00
#SBATCH --mem-per-cpu=8048
#SBATCH --mail-type=FAIL
#SBATCH --mail-type=END
#SBATCH --mail-user=someone@example.edu
#SBATCH -p e,f
#SBATCH --export=PATH,R_LIBS,CLUSTER,CORES,LD_LIBRARY_PATH

cd /data/u/TestStatRIInterference
