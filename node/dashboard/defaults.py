"""The dashboard's defaults, in a module that imports nothing: the command line's help reads them at once."""

HOST = "127.0.0.1"  # loopback: serving elsewhere takes --public (server.check_bind)
PORT = 8765
REFRESH_S = 5.0  # between the page's updates and between reads of the DHT
POINTS = 400  # kept per line and node (series.BoundedSeries)
# A request (its line and headers) must arrive whole within this many seconds of its connection, however slowly
# its bytes trickle, in at most this many bytes and lines (a browser's take well under 2 KiB; a machine's cookies
# for localhost can take more); at most this many connections are served at once, and a new one beyond cuts the
# one sending its request longest (server.py): half-sent requests cannot hold the server's threads.
REQUEST_TIMEOUT_S = 5.0
MAX_HEAD_BYTES = 16384
MAX_HEAD_LINES = 64
MAX_CONNECTIONS = 32
