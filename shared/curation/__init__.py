"""Memory curation: who may move a topic between none / promoted / deprecated (R11–R21)."""
