#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 71489109150); e-mail addresses replaced
#SBATCH -p el8-rpi
#SBATCH -N 1
#SBATCH --exclusive
#SBATCH -t 6:00:00
#SBATCH -J jaxlib-ppc64le
#SBATCH -o /gpfs/u/scratch-shared/jaxbuild/build-%j.log
#
#==============================================================================
# End-to-end CPU-only jaxlib build for POWER9 / ppc64le  (RPI DCS cluster)
#
#   sbatch build_jax_ppc64le.sh 3.11
set -euo pipefail
