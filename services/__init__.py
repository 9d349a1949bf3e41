"""Services below the app: the parts of the server that import no Streamlit, so they can be
tested, benchmarked and reused without it. memory (byte-sized LRU caches, returning freed heap),
server (the server's settings and limits from its flags and environment), rooms/ (class rooms'
store: SQLite and Redis back ends, their rules, CSV export).

Imports tfm; never imports ui or streamlit (tests/test_layers.py).
"""
