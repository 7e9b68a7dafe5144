"""Drift detection: has the conversation moved on to a new subject? (R5, R6, R30)"""
