#pragma once
// Internal: the evaluator (jinja_eval.cpp) and the built-in filters, tests, methods and globals
// (jinja_builtins.cpp, jinja_filters.cpp).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chat_template/jinja_ast.h"

namespace warden::chat_template::jinja {

class Evaluator {
  public:
    Evaluator(const Value& globals, const Limits& limits);
    ~Evaluator();
    Evaluator(const Evaluator&) = delete;
    Evaluator& operator=(const Evaluator&) = delete;
    std::string run(const Body& body);

    // Calls a function value; throws for non-callables.
    Value call(const Value& fn, Args& args);
    // obj.name as jinja's getattr: methods of str/dict, dict keys, namespace attributes;
    // Undefined when absent; throws when obj is undefined.
    Value getattr(const Value& obj, const std::string& name);
    // obj[key] as jinja's getitem.
    Value getitem(const Value& obj, const Value& key);
    // Throws when a produced string exceeds the output limit.
    void check_size(size_t n) const;
    void step();
    const Limits& limits() const { return limits_; }

  private:
    using Frame = std::map<std::string, Value>;
    using Frames = std::vector<std::shared_ptr<Frame>>;
    enum class Flow { Normal, Break, Continue };

    Flow exec(const Body& body);
    Flow exec(const Node& n);
    void exec_for(const Node& n, Flow& flow);
    Value eval(const Expr& e);
    Value eval_binary(const Expr& e);
    Value eval_slice(const Expr& e);
    void eval_args(const Expr& e, size_t first, Args& args);
    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value v);
    Value make_macro(const Node& n);
    [[noreturn]] void fail_at(int line, int col, const std::string& msg) const;

    std::shared_ptr<Frame> new_frame();

    Frames frames_;
    Frames created_;  // every frame this evaluator made (see ~Evaluator)
    std::string out_;
    Limits limits_;
    size_t steps_ = 0;
    int depth_ = 0;
};

// Built-ins (jinja_builtins.cpp / jinja_filters.cpp).
Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, Args& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& v, Args& args);
// Method `name` of a str/dict/list value, or Undefined when it has none.
Value bound_method(const Value& self, const std::string& name);
// raise_exception, strftime_now, range, namespace, dict.
void add_globals(Dict& globals);
// Python-style str.strip(chars) family; chars null: whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);

}  // namespace warden::chat_template::jinja
