from kernelopt.cli import run

run()
