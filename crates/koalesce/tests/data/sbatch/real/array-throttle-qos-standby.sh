#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 63246924939); e-mail addresses replaced
#SBATCH --job-name=save_mass_1pct_pt
#SBATCH --array=0-35%36
#SBATCH --mem=8G
#SBATCH --cpus-per-task=2
#SBATCH --account=physics
#SBATCH --partition=cpu
#SBATCH --time=04:00:00
#SBATCH --qos=standby 
#SBATCH --output=/dev/null
#SBATCH --error=/dev/null

set -euo pipefail
