#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 21625351515); e-mail addresses replaced
#SBATCH --exclusive

set -euoo posix pipefail
