"""distir.runtime"""
