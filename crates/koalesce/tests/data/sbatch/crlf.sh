#!/bin/bash
#SBATCH --job-name=crlf
#SBATCH --ntasks=3
#SBATCH --time=10:00

echo hi
