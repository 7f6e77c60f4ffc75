from imagekit.cli import run

run()
