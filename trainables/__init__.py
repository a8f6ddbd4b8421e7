"""One trial: data, encoders, objectives, probes, the loop, checkpoints."""

from trainables.arithmetic import pin_cpu_arithmetic

pin_cpu_arithmetic()  # before any of the trial's arithmetic, in every process that runs one
