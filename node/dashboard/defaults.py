"""The dashboard's defaults, in a module that imports nothing: the command line's help reads them at once."""

HOST = "127.0.0.1"  # loopback: serving elsewhere takes --public (server.check_bind)
PORT = 8765
REFRESH_S = 5.0  # between the page's updates and between reads of the DHT
POINTS = 400  # kept per line and node (series.BoundedSeries)
