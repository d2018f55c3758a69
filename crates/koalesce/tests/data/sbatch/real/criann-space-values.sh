#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 47195480244); e-mail addresses replaced

# Slurm submission script, 
# torch job 

# Job name
#SBATCH -J "main"

# Batch output file
#SBATCH --output main.o%J

# Batch error file
#SBATCH --error main.e%J

# Partition (submission class)
#SBATCH --partition mesonet

# ----------------------------
# processes / tasks
#SBATCH -n 1

# ------------------------
# Job time (hh:mm:ss)
#SBATCH --time 1:00:00
# ------------------------

#SBATCH --account=m25206

##SBATCH --mail-type ALL
# User e-mail address
#SBATCH --mail-user someone@example.fr


## Job script ##
cd /tmp
