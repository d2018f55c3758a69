#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 12293020980); e-mail addresses replaced

#SBATCH -p batch
#SBATCH -A myaccount
#SBATCH -J myaccount-openllama2
#SBATCH -N 2                       # 64x8x4
#SBATCH -t 04:00:00            # wall time
#SBATCH --ntasks-per-node=1        # tasks per node
#SBATCH --exclusive                # exclusive node access
#SBATCH --mem=0                    # all mem avail
#SBATCH --mail-type=FAIL           # only send email on failure
#SBATCH --overcommit               # needed for pytorch
#SBATCH --output=out.log

# project settings
PROJECT_PATH=$(cd ../../; realpath .)
