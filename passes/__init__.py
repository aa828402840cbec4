"""distir.passes"""
