#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 51843425518); e-mail addresses replaced
#SBATCH -J evopool_arc3_sa
#SBATCH -A hw-grp
#SBATCH -p hw-grp,share,preempt
#SBATCH --gres=gpu:0
#SBATCH -t 2-00:00:00
#SBATCH --mem=64G
#SBATCH -c 4
#SBATCH -o /nfs/hpc/share/u/logs/arc3_sa_%j.out
#SBATCH -e /nfs/hpc/share/u/logs/arc3_sa_%j.err

echo "=== arc3_sa ==="
