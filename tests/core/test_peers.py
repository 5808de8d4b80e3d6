"""Reading the kernel's TCP table to tell whether a script joined its cluster (pure)."""

from raytf._core import peers

# /proc/net/tcp as Linux writes it: 127.0.0.1:40000 (a TF server) with a peer connected from port 51000, and a
# connection from here to 198.18.0.3:40001.
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:9C40 0100007F:C738 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 020012C6:D000 030012C6:9C41 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 0000000000000000FFFF00000100007F:C000 0000000000000000FFFF00000100007F:9C42 01 00000000:00000000
   1: 00000000000000000000000001000000:C001 00000000000000000000000001000000:9C43 01 00000000:00000000
"""


def test_established_connections_are_parsed_with_their_addresses():
    assert peers.connections(TCP) == [(("127.0.0.1", 40000), ("127.0.0.1", 51000)),
                                      (("198.18.0.2", 53248), ("198.18.0.3", 40001))]
    assert peers.connections(TCP6) == [(("127.0.0.1", 49152), ("127.0.0.1", 40002)),
                                       (("::1", 49153), ("::1", 40003))]
    assert peers.connections("header only\n") == [] and peers.connections("h\n 0: garbage 01\n") == []


def test_joined_means_a_connection_with_the_cluster():
    conns = peers.connections(TCP)
    assert peers.joined(conns, own_port=40000, peers=set())  # a peer connected to this task's server
    assert peers.joined(conns, own_port=1, peers={("198.18.0.3", 40001)})  # this task connected to a peer
    # A MirroredStrategy copy: its only connections are elsewhere (a data server, an in-process test cluster).
    assert not peers.joined(conns, own_port=1, peers={("198.18.0.9", 40001), ("127.0.0.1", 40002)})


def test_cluster_endpoints_from_tf_config():
    tf_config = {"cluster": {"worker": ["host-a:40000", "host-b:40001"], "ps": ["host-b:40002"]},
                 "task": {"type": "worker", "index": 0}}
    ips = {"host-a": "198.18.0.2", "host-b": "198.18.0.3"}
    own, others = peers.cluster_endpoints(tf_config, resolve=ips.__getitem__)
    assert own == 40000 and others == {("198.18.0.3", 40001), ("198.18.0.3", 40002)}
    alone = {"cluster": {"worker": ["host-a:40000"]}, "task": {"type": "worker", "index": 0}}
    assert peers.cluster_endpoints(alone, resolve=ips.__getitem__) == (None, set())


def test_a_closed_connection_in_time_wait_still_says_it_connected_and_a_half_open_one_does_not():
    """A short script's channels are closed before a look sees them open; TIME_WAIT keeps them for a minute (raytf
    issue 71: a correct 10-step script was refused). A SYN_SENT one never connected; LISTEN is the own server."""
    table = """  sl  local_address rem_address   st
   0: 020012C6:D000 030012C6:9C41 06 00000000:00000000
   1: 020012C6:D001 030012C6:9C42 02 00000000:00000000
   2: 00000000:9C40 00000000:0000 0A 00000000:00000000
"""
    assert peers.connections(table) == [(("198.18.0.2", 53248), ("198.18.0.3", 40001))]
    assert not peers.joined(peers.connections(table), own_port=40000, peers={("198.18.0.3", 40002)})
