#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 54076314341); e-mail addresses replaced

#SBATCH --account=did_robot_learning_359
#SBATCH --job-name=task9_l1_tinyvla_libero_eval
#SBATCH --partition=gpuq
#SBATCH --exclude=gnode13
#SBATCH --gres=gpu:1
#SBATCH --ntasks=1
#SBATCH --nodes=1
#SBATCH --cpus-per-task=16
#SBATCH --array=8,18,28      # 30 jobs: 3 seeds × 10 tasks; SEED=ARRAY_ID/10, TASK_ID=ARRAY_ID%10
#SBATCH --output=/mnt/beegfs/u/outputs/logs/eval_seed_%a_%j.out
#SBATCH --error=/mnt/beegfs/u/outputs/logs/eval_seed_%a_%j.err


# ==========================================
