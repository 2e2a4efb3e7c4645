"""Offline analysis of a results folder: stalls, their causes, recommendations."""
