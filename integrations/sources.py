"""(being written: issue 24)"""
