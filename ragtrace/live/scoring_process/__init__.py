"""Scoring in a process of its own (`worker="process"`): the wire protocol, the app's side, the child."""
