"""Controllers: what decides topics, partitions, replica placement and leaders, and writes them into
the metadata image the brokers serve.  ``local`` is a single broker's own controller (its metadata
store); a cluster's controller coordinates through ZooKeeper."""
