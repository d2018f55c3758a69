#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 44639425935); its --gres=gpu:2 line left out

# 设置集群环境（根据你的集群配置调整）
#SBATCH --job-name=winograd_convolution  # 作业名称
#SBATCH --nodes=1                        # 使用的节点数
#SBATCH --ntasks-per-node=1              # 每个节点的任务数
#SBATCH --cpus-per-task=64               # 每个任务的 CPU 核心数
#SBATCH --output=output.log              # 输出日志文件
#SBATCH --exclusive
#SBATCH --exclude hepnode0

# 加载必要的模块（根据集群环境调整）
module purge
