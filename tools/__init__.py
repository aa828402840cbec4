"""distir.tools"""
