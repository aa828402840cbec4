"""distir.lowering"""
