// Evaluation of the Jinja syntax tree: statements, scopes, expressions and operators.
#include "chat_template/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "util/error.h"

namespace warden::chat_template::jinja {

namespace {

// Marks an error that already names its template line.
struct LocatedError : util::Error {
    using util::Error::Error;
};

int64_t int_op(char op, int64_t a, int64_t b) {
    int64_t r = 0;
    const bool ovf = op == '+'   ? __builtin_add_overflow(a, b, &r)
                     : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                 : __builtin_mul_overflow(a, b, &r);
    if (ovf) throw util::Error("integer overflow");
    return r;
}

Value number_result(double d) {
    return Value::number(d);
}

}  // namespace

Evaluator::Evaluator(const Value& globals, const Limits& limits) : limits_(limits) {
    auto root = new_frame();
    if (globals.is_dict())
        for (const auto& [k, v] : globals.dict->items) (*root)[k] = v;
    frames_.push_back(root);
    frames_.push_back(new_frame());
}

// Macros capture the frames they were defined in and are stored in those frames: a
// shared_ptr cycle. Emptying every frame at the end breaks all such cycles.
Evaluator::~Evaluator() {
    for (auto& f : created_) f->clear();
}

std::shared_ptr<Evaluator::Frame> Evaluator::new_frame() {
    created_.push_back(std::make_shared<Frame>());
    return created_.back();
}

void Evaluator::fail_at(int line, int col, const std::string& msg) const {
    throw LocatedError("chat template error at line " + std::to_string(line) + ", column " +
                       std::to_string(col) + ": " + msg);
}

void Evaluator::check_size(size_t n) const {
    if (n > limits_.max_output)
        throw util::Error("rendered text exceeds the limit of " +
                          std::to_string(limits_.max_output) + " bytes");
}

void Evaluator::step() {
    if (++steps_ > limits_.max_steps)
        throw util::Error("template exceeds the limit of " + std::to_string(limits_.max_steps) +
                          " evaluation steps");
}

std::string Evaluator::run(const Body& body) {
    exec(body);
    return std::move(out_);
}

Value Evaluator::lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
        auto f = (*it)->find(name);
        if (f != (*it)->end()) return f->second;
    }
    return Value::undefined(name);
}

void Evaluator::assign(const std::string& name, Value v) {
    (*frames_.back())[name] = std::move(v);
}

Evaluator::Flow Evaluator::exec(const Body& body) {
    for (const auto& n : body) {
        const Flow f = exec(*n);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Evaluator::Flow Evaluator::exec(const Node& n) {
    step();
    try {
        switch (n.kind) {
            case Node::Kind::Text:
                out_ += n.text;
                check_size(out_.size());
                return Flow::Normal;
            case Node::Kind::Output: {
                const Value v = eval(*n.expr);
                out_ += to_str(v);
                check_size(out_.size());
                return Flow::Normal;
            }
            case Node::Kind::If:
                for (const auto& [cond, body] : n.branches)
                    if (truthy(eval(*cond))) return exec(body);
                return exec(n.else_body);
            case Node::Kind::For: {
                Flow flow = Flow::Normal;
                exec_for(n, flow);
                return Flow::Normal;
            }
            case Node::Kind::Set: {
                Value v = eval(*n.expr);
                if (n.target) {
                    Value ns = lookup(n.target->kids[0]->name);
                    if (!ns.is_dict() || !ns.is_namespace)
                        throw util::Error("cannot assign attribute on non-namespace object '" +
                                          n.target->kids[0]->name + "'");
                    ns.dict->set(n.target->name, std::move(v));
                } else if (n.names.size() == 1) {
                    assign(n.names[0], std::move(v));
                } else {
                    const List items = iterate(v);
                    if (items.size() != n.names.size())
                        throw util::Error("cannot unpack " + std::to_string(items.size()) +
                                          " values into " + std::to_string(n.names.size()) +
                                          " names");
                    for (size_t k = 0; k < items.size(); ++k) assign(n.names[k], items[k]);
                }
                return Flow::Normal;
            }
            case Node::Kind::SetBlock:
            case Node::Kind::FilterBlock: {
                std::string saved;
                saved.swap(out_);
                exec(n.body);
                Value text = Value::string(std::move(out_));
                out_.swap(saved);
                if (n.kind == Node::Kind::SetBlock) {
                    assign(n.names[0], std::move(text));
                } else {
                    Args args;
                    for (const auto& a : n.filter_args) args.pos.push_back(eval(*a));
                    out_ += to_str(apply_filter(*this, n.text, text, args));
                    check_size(out_.size());
                }
                return Flow::Normal;
            }
            case Node::Kind::Macro:
                assign(n.text, make_macro(n));
                return Flow::Normal;
            case Node::Kind::CallBlock: {
                // caller() renders the block body; it is visible to the called macro as `caller`.
                Value caller = make_macro(n);
                const Expr& call = *n.expr;
                Value fn = eval(*call.kids[0]);
                Args args;
                eval_args(call, 1, args);
                args.kw.emplace_back("caller", caller);
                out_ += to_str(this->call(fn, args));
                check_size(out_.size());
                return Flow::Normal;
            }
            case Node::Kind::Scope:
                return exec(n.body);
            case Node::Kind::Break:
                return Flow::Break;
            case Node::Kind::Continue:
                return Flow::Continue;
        }
    } catch (const LocatedError&) {
        throw;
    } catch (const util::Error& e) {
        fail_at(n.line, n.col, e.what());
    }
    return Flow::Normal;
}

void Evaluator::exec_for(const Node& n, Flow& flow) {
    const Value seq = eval(*n.expr);
    List items = iterate(seq);
    frames_.push_back(new_frame());
    auto bind = [&](const Value& item) {
        if (n.names.size() == 1) {
            assign(n.names[0], item);
            return;
        }
        const List parts = iterate(item);
        if (parts.size() != n.names.size())
            throw util::Error("cannot unpack " + std::to_string(parts.size()) + " values into " +
                              std::to_string(n.names.size()) + " loop variables");
        for (size_t k = 0; k < parts.size(); ++k) assign(n.names[k], parts[k]);
    };
    if (n.cond) {  // `for x in xs if cond`: filtered before the loop (loop.length counts kept
                   // items)
        List kept;
        for (const auto& it : items) {
            step();
            bind(it);
            if (truthy(eval(*n.cond))) kept.push_back(it);
        }
        items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    // One loop object per loop, updated in place each iteration (as jinja2's LoopContext).
    Value loop = Value::make_dict();
    auto pos = std::make_shared<int64_t>(0);
    auto& d = *loop.dict;
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                            "depth", "depth0", "previtem", "nextitem"})
        d.set(key, Value::none());
    d.set("cycle", Value::function([pos](Evaluator&, Args& a) {
              if (a.pos.empty()) throw util::Error("no items for cycling given");
              return a.pos[static_cast<size_t>(*pos) % a.pos.size()];
          }));
    for (int64_t k = 0; k < len; ++k) {
        step();
        bind(items[static_cast<size_t>(k)]);
        *pos = k;
        auto& it = d.items;
        it[0].second = Value::integer(k + 1);
        it[1].second = Value::integer(k);
        it[2].second = Value::integer(len - k);
        it[3].second = Value::integer(len - k - 1);
        it[4].second = Value::boolean(k == 0);
        it[5].second = Value::boolean(k == len - 1);
        it[6].second = Value::integer(len);
        it[7].second = Value::integer(1);
        it[8].second = Value::integer(0);
        it[9].second = k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("previtem");
        it[10].second =
            k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value::undefined("nextitem");
        assign("loop", loop);
        flow = exec(n.body);
        if (flow == Flow::Break) break;
    }
    flow = Flow::Normal;
    if (len == 0) exec(n.else_body);
    frames_.pop_back();
}

Value Evaluator::make_macro(const Node& n) {
    const Frames captured = frames_;
    const Node* node = &n;
    return Value::function([node, captured](Evaluator& ev, Args& args) {
        if (++ev.depth_ > ev.limits_.max_depth)
            throw util::Error("macro calls nested deeper than " +
                              std::to_string(ev.limits_.max_depth));
        Frames saved = std::move(ev.frames_);
        ev.frames_ = captured;
        ev.frames_.push_back(ev.new_frame());
        if (args.pos.size() > node->names.size())
            throw util::Error("macro '" + node->text + "' takes not more than " +
                              std::to_string(node->names.size()) + " argument(s)");
        for (size_t k = 0; k < node->names.size(); ++k) {
            const Value* v = args.get(k, node->names[k].c_str());
            if (v)
                ev.assign(node->names[k], *v);
            else if (node->defaults[k])
                ev.assign(node->names[k], ev.eval(*node->defaults[k]));
            else
                ev.assign(node->names[k], Value::undefined(node->names[k]));
        }
        for (const auto& [k, v] : args.kw) {
            bool known = k == "caller";
            for (const auto& nm : node->names) known = known || nm == k;
            if (!known)
                throw util::Error("macro '" + node->text + "' takes no keyword argument '" + k +
                                  "'");
            if (k == "caller") ev.assign(k, v);
        }
        std::string saved_out;
        saved_out.swap(ev.out_);
        ev.exec(node->body);
        std::string result;
        result.swap(ev.out_);
        ev.out_.swap(saved_out);
        ev.frames_ = std::move(saved);
        --ev.depth_;
        return Value::string(std::move(result));
    });
}

Value Evaluator::call(const Value& fn, Args& args) {
    if (fn.is_undefined()) throw util::Error("'" + fn.s + "' is undefined");
    if (!fn.is_callable())
        throw util::Error(std::string("'") + kind_name(fn) + "' object is not callable");
    return (*fn.func)(*this, args);
}

Value Evaluator::getattr(const Value& obj, const std::string& name) {
    if (obj.is_undefined())
        throw util::Error("'" + (obj.s.empty() ? std::string("value") : obj.s) + "' is undefined");
    if (obj.is_dict()) {
        if (!obj.is_namespace) {
            Value m = bound_method(obj, name);
            if (!m.is_undefined()) return m;
        }
        const Value* v = obj.dict->find(name);
        return v ? *v : Value::undefined(name);
    }
    Value m = bound_method(obj, name);
    if (!m.is_undefined()) return m;
    return Value::undefined(name);
}

Value Evaluator::getitem(const Value& obj, const Value& key) {
    if (obj.is_undefined())
        throw util::Error("'" + (obj.s.empty() ? std::string("value") : obj.s) + "' is undefined");
    if (obj.is_dict()) {
        if (key.is_string()) {
            const Value* v = obj.dict->find(key.s);
            if (v) return *v;
            if (!obj.is_namespace) return bound_method(obj, key.s);
        }
        return Value::undefined(key.is_string() ? key.s : to_str(key));
    }
    if ((obj.is_list() || obj.is_string()) &&
        (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool)) {
        if (obj.is_list()) {
            const int64_t n = static_cast<int64_t>(obj.list->size());
            const int64_t k = key.i < 0 ? key.i + n : key.i;
            if (k < 0 || k >= n) return Value::undefined("[" + std::to_string(key.i) + "]");
            return (*obj.list)[static_cast<size_t>(k)];
        }
        const std::u32string cps = utf8_decode(obj.s);
        const int64_t n = static_cast<int64_t>(cps.size());
        const int64_t k = key.i < 0 ? key.i + n : key.i;
        if (k < 0 || k >= n) return Value::undefined("[" + std::to_string(key.i) + "]");
        return Value::string(utf8_encode(cps.substr(static_cast<size_t>(k), 1)));
    }
    if (key.is_string()) return getattr(obj, key.s);
    return Value::undefined(to_str(key));
}

void Evaluator::eval_args(const Expr& e, size_t first, Args& args) {
    for (size_t k = first; k < e.kids.size(); ++k) args.pos.push_back(eval(*e.kids[k]));
    for (const auto& [name, x] : e.kwargs) args.kw.emplace_back(name, eval(*x));
}

Value Evaluator::eval(const Expr& e) {
    struct Guard {
        int& d;
        Guard(int& dd, int max) : d(dd) {
            if (++d > max * 4) throw util::Error("expression evaluation nested too deeply");
        }
        ~Guard() { --d; }
    } guard(depth_, limits_.max_depth);
    switch (e.kind) {
        case Expr::Kind::Const:
            return e.value;
        case Expr::Kind::Name:
            return lookup(e.name);
        case Expr::Kind::GetAttr:
            return getattr(eval(*e.kids[0]), e.name);
        case Expr::Kind::GetItem: {
            Value obj = eval(*e.kids[0]);
            return getitem(obj, eval(*e.kids[1]));
        }
        case Expr::Kind::Slice:
            return eval_slice(e);
        case Expr::Kind::Call: {
            Value fn = eval(*e.kids[0]);
            Args args;
            eval_args(e, 1, args);
            return call(fn, args);
        }
        case Expr::Kind::Filter: {
            Value v = eval(*e.kids[0]);
            Args args;
            eval_args(e, 1, args);
            return apply_filter(*this, e.name, v, args);
        }
        case Expr::Kind::Test: {
            Value v = eval(*e.kids[0]);
            Args args;
            eval_args(e, 1, args);
            return Value::boolean(apply_test(*this, e.name, v, args) != e.negated);
        }
        case Expr::Kind::Unary: {
            Value v = eval(*e.kids[0]);
            if (e.name == "not") return Value::boolean(!truthy(v));
            if (v.kind == Value::Kind::Float) return Value::number(e.name == "-" ? -v.f : v.f);
            if (v.is_number()) {
                if (e.name == "+") return Value::integer(v.i);
                if (v.i == INT64_MIN) throw util::Error("integer overflow");
                return Value::integer(-v.i);
            }
            throw util::Error(std::string("bad operand type for unary ") + e.name + ": '" +
                              kind_name(v) + "'");
        }
        case Expr::Kind::Binary:
            return eval_binary(e);
        case Expr::Kind::Cond:
            if (truthy(eval(*e.kids[1]))) return eval(*e.kids[0]);
            return e.kids[2] ? eval(*e.kids[2]) : Value::undefined();
        case Expr::Kind::ListLit: {
            List l;
            for (const auto& k : e.kids) l.push_back(eval(*k));
            return e.tuple ? Value::make_tuple(std::move(l)) : Value::make_list(std::move(l));
        }
        case Expr::Kind::DictLit: {
            Value d = Value::make_dict();
            for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
                Value key = eval(*e.kids[k]);
                if (!key.is_string()) key = Value::string(to_str(key));
                d.dict->set(key.s, eval(*e.kids[k + 1]));
            }
            return d;
        }
    }
    return Value::undefined();
}

namespace {

// Python's PySlice_AdjustIndices: the positions a slice selects.
std::vector<size_t> slice_indices(int64_t n, const Value* start, const Value* stop,
                                  const Value* step_v) {
    auto as_int = [](const Value* v, const char* what) -> std::optional<int64_t> {
        if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
        if (v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool)
            throw util::Error(std::string("slice ") + what + " must be an integer");
        return v->i;
    };
    const int64_t step = as_int(step_v, "step").value_or(1);
    if (step == 0) throw util::Error("slice step cannot be zero");
    auto adjust = [n, step](std::optional<int64_t> x, bool is_start) {
        if (!x) return step > 0 ? (is_start ? int64_t{0} : n) : (is_start ? n - 1 : int64_t{-1});
        int64_t v = *x;
        if (v < 0) {
            v += n;
            if (v < 0) v = step < 0 ? -1 : 0;
        } else if (v >= n) {
            v = step < 0 ? n - 1 : n;
        }
        return v;
    };
    const int64_t a = adjust(as_int(start, "start"), true), b = adjust(as_int(stop, "stop"), false);
    std::vector<size_t> idx;
    if (step > 0)
        for (int64_t k = a; k < b; k += step) idx.push_back(static_cast<size_t>(k));
    else
        for (int64_t k = a; k > b; k += step) idx.push_back(static_cast<size_t>(k));
    return idx;
}

}  // namespace

Value Evaluator::eval_slice(const Expr& e) {
    Value obj = eval(*e.kids[0]);
    Value parts[3];
    const Value* ptr[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < 3; ++k)
        if (e.kids[static_cast<size_t>(k) + 1]) {
            parts[k] = eval(*e.kids[static_cast<size_t>(k) + 1]);
            ptr[k] = &parts[k];
        }
    if (obj.is_list()) {
        List out;
        for (size_t k :
             slice_indices(static_cast<int64_t>(obj.list->size()), ptr[0], ptr[1], ptr[2]))
            out.push_back((*obj.list)[k]);
        return Value::make_list(std::move(out));
    }
    if (obj.is_string()) {
        const std::u32string cps = utf8_decode(obj.s);
        std::u32string out;
        for (size_t k : slice_indices(static_cast<int64_t>(cps.size()), ptr[0], ptr[1], ptr[2]))
            out += cps[k];
        return Value::string(utf8_encode(out));
    }
    if (obj.is_undefined()) throw util::Error("'" + obj.s + "' is undefined");
    throw util::Error(std::string("'") + kind_name(obj) + "' object is not subscriptable");
}

Value Evaluator::eval_binary(const Expr& e) {
    const std::string& op = e.name;
    Value a = eval(*e.kids[0]);
    if (op == "and") return truthy(a) ? eval(*e.kids[1]) : a;
    if (op == "or") return truthy(a) ? a : eval(*e.kids[1]);
    Value b = eval(*e.kids[1]);
    if (op == "==") return Value::boolean(equals(a, b));
    if (op == "!=") return Value::boolean(!equals(a, b));
    if (op == "<") return Value::boolean(compare(a, b) < 0);
    if (op == ">") return Value::boolean(compare(a, b) > 0);
    if (op == "<=") return Value::boolean(compare(a, b) <= 0);
    if (op == ">=") return Value::boolean(compare(a, b) >= 0);
    if (op == "in" || op == "not in") {
        Args args;
        args.pos.push_back(b);
        return Value::boolean(apply_test(*this, "in", a, args) == (op == "in"));
    }
    if (op == "~") {
        std::string s = to_str(a) + to_str(b);
        check_size(s.size());
        return Value::string(std::move(s));
    }
    const auto type_error = [&]() -> util::Error {
        if (a.is_undefined() || b.is_undefined())
            return util::Error("'" + (a.is_undefined() ? a.s : b.s) + "' is undefined");
        return util::Error("unsupported operand type(s) for " + op + ": '" + kind_name(a) +
                           "' and '" + kind_name(b) + "'");
    };
    if (a.is_number() && b.is_number()) {
        const bool fl = a.kind == Value::Kind::Float || b.kind == Value::Kind::Float;
        const double x = a.as_double(), y = b.as_double();
        if (op == "+") return fl ? number_result(x + y) : Value::integer(int_op('+', a.i, b.i));
        if (op == "-") return fl ? number_result(x - y) : Value::integer(int_op('-', a.i, b.i));
        if (op == "*") return fl ? number_result(x * y) : Value::integer(int_op('*', a.i, b.i));
        if (op == "/") {
            if (y == 0) throw util::Error("division by zero");
            return number_result(x / y);
        }
        if (op == "//" || op == "%") {
            if (fl) {
                if (y == 0) throw util::Error("float modulo or floor division by zero");
                const double q = std::floor(x / y);
                return number_result(op == "//" ? q : x - q * y);
            }
            if (b.i == 0) throw util::Error("integer division or modulo by zero");
            if (a.i == INT64_MIN && b.i == -1) throw util::Error("integer overflow");
            int64_t q = a.i / b.i, m = a.i % b.i;
            if (m != 0 && ((m < 0) != (b.i < 0))) {
                --q;
                m += b.i;
            }
            return Value::integer(op == "//" ? q : m);
        }
        if (op == "**") {
            if (!fl && b.i >= 0) {
                int64_t acc = 1;
                for (int64_t k = 0; k < b.i; ++k) {
                    if (__builtin_mul_overflow(acc, a.i, &acc))
                        throw util::Error("integer overflow");
                    if (acc == 0 || acc == 1) break;
                }
                if (acc == 1 && a.i == -1) acc = (b.i % 2) ? -1 : 1;
                return Value::integer(acc);
            }
            return number_result(std::pow(x, y));
        }
        throw type_error();
    }
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            check_size(a.s.size() + b.s.size());
            return Value::string(a.s + b.s);
        }
        if (a.is_list() && b.is_list()) {
            List l = *a.list;
            l.insert(l.end(), b.list->begin(), b.list->end());
            return Value::make_list(std::move(l));
        }
        throw type_error();
    }
    if (op == "*") {
        const Value* seq = a.is_number() ? &b : &a;
        const Value* cnt = a.is_number() ? &a : &b;
        if ((seq->is_string() || seq->is_list()) &&
            (cnt->kind == Value::Kind::Int || cnt->kind == Value::Kind::Bool)) {
            const int64_t n = std::max<int64_t>(0, cnt->i);
            const size_t unit = seq->is_string() ? seq->s.size() : seq->list->size() * 16;
            if (unit && static_cast<uint64_t>(n) > limits_.max_output / unit)
                throw util::Error("sequence repetition exceeds the output limit");
            if (seq->is_string()) {
                std::string s;
                for (int64_t k = 0; k < n; ++k) s += seq->s;
                return Value::string(std::move(s));
            }
            List l;
            for (int64_t k = 0; k < n; ++k) l.insert(l.end(), seq->list->begin(), seq->list->end());
            return Value::make_list(std::move(l));
        }
    }
    throw type_error();
}

std::string render(const Template& t, const Value& globals, const Limits& limits) {
    Value g = globals;
    if (!g.is_dict()) g = Value::make_dict();
    Value with_builtins = Value::make_dict();
    add_globals(*with_builtins.dict);
    for (const auto& [k, v] : g.dict->items) with_builtins.dict->set(k, v);
    Evaluator ev(with_builtins, limits);
    return ev.run(t.body);
}

}  // namespace warden::chat_template::jinja
