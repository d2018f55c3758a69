#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 60365520405); e-mail addresses replaced
#SBATCH -J duo_2k                                # Job name
#SBATCH -A llmservice                            # account
#SBATCH -p batch                                   # batch 
#SBATCH -o watch_folder/%x_%j.out                  # output file (%j expands to jobID)
#SBATCH --get-user-env                             # retrieve the users login environment
#SBATCH --open-mode=append                         # Do not overwrite logs
#SBATCH -N 1                                       # number of nodes # -N 16
#SBATCH -t 04:00:00                                # wall time  (04:00:00 for batch, 08:00:00 for backfill)
#SBATCH --exclusive                                # exclusive node access
#SBATCH --mem=0                                    # all mem avail
#SBATCH --mail-type=FAIL                           # only send email on failure
#SBATCH --ntasks-per-node=8                        # n tasks per machine (one task per gpu) <required>
#SBATCH --overcommit                               # Needed for pytorch


nvidia-smi
