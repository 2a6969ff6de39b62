"""bloomtrain"""
