"""Packet-level simulation on ns-3 (the optional ``ns3`` extra): the fabric's topologies,
switch queues and transports at scales the emulated fabric cannot hold. Imported only by
``gradfabric sim packet``; see simulator/README.md."""
