"""The dashboard's defaults, in a module that imports nothing: the command line's help reads them at once."""

HOST = "127.0.0.1"  # loopback: serving elsewhere takes --public (server.check_bind)
PORT = 8765
REFRESH_S = 5.0  # between the page's updates and between reads of the DHT
POINTS = 400  # kept per line and node (series.BoundedSeries)
# A request must arrive whole within this many seconds of its connection, and at most this many connections are
# served at once (more are closed unanswered): half-sent requests cannot hold the server's threads.
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
