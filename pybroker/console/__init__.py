"""The web console: server-rendered pages over ``pybroker.metrics.view.ClusterView``."""
