"""bloomdata"""
