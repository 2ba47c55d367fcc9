from focuscrawl.cli import app

app()
