"""The SSH launcher: host agents started over SSH on the hosts of a hosts file."""
