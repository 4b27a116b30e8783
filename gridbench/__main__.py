from gridbench.cli import run

run()
