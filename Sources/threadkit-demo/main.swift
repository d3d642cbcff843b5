import ThreadKit
print("demo")
